// A driver written as a third party would write one, in a module of its
// own: conformance/harness's TestEagerDriver runs its tests (with GOWORK=off,
// so this go.mod's replacement, not go.work's, finds dlm in this clone).
module example.com/eagerdriver

go 1.26.0

require (
	github.com/dlmgo/dlm v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/dlmgo/dlm v0.1.0 => ../../../..
