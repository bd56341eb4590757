// Package httpguard holds the checks the s3queue command's HTTP listeners
// (worker --http, monitor --http) make before a handler runs: that the
// request's Host header names this server (a browser tricked by DNS
// rebinding names the attacker's host), and that the request carries the
// bearer token when one is configured. Every refusal is logged with the
// client's address; the token never is.
//
// It must not know the handlers it guards.
package httpguard
