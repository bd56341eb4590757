// Package storeurl opens any s3store backend from one URL, the form the
// command line and configuration files use: s3://BUCKET/PREFIX?endpoint=...,
// file:///ABSOLUTE/DIR, or mem://NAME.
//
// It owns URL syntax and its error messages, and Redact for logging URLs. It
// must not accept credentials in a URL (they come from the standard AWS
// environment and profiles) nor put secrets in an error.
package storeurl
