// Package awss3 is the s3store.Store backend for real S3 servers (AWS S3,
// MinIO, versitygw and other S3-compatible services), built on
// aws-sdk-go-v2.
//
// It owns the translation of provider errors into the s3store sentinels (in
// one function, translate), the retry policy for transient failures, and the
// capture of every response's Date header for the authoritative clock. It
// must not know about tasks, leases or JSON: it moves bytes under keys.
package awss3
