// Package local is an s3store.Store kept in a directory on this machine, for
// running s3queue without an S3 server and for tests that need a store shared
// by several processes.
//
// It owns the directory it is opened on: object files, the lock files that
// make conditional writes atomic across processes, and the temporary files of
// writes in flight. Conditional writes hold a file lock (flock) shared by all
// processes; reads take no lock and never see a partial write, because every
// write lands by rename. The server clock is this machine's clock.
//
// Opening and reading write nothing: the directory, the lock files and the
// object directories are made by the writes that need them, private to the
// writing user (0700 and 0600). Below its directory the store reaches every
// file from its parent's descriptor with O_NOFOLLOW and follows no symbolic
// link, so nothing planted in the tree can redirect a write or a delete.
//
// It must not be pointed at a network filesystem whose flock is not
// coherent across machines: atomicity holds between processes of one host.
package local
