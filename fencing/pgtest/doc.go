// Package pgtest tests package fencing against a real PostgreSQL server,
// which the tests start themselves, and exports that launcher ([Start]) to
// the fault suite. It is a module of its own so that the PostgreSQL driver
// (lib/pq) stays out of the go.mod and go.sum of dlm's core module.
package pgtest
