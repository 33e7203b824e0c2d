module github.com/dlmgo/dlm/faults

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/dlmgo/dlm v0.1.0
	github.com/dlmgo/dlm/fencing/pgtest v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/sys v0.48.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/lib/pq v1.12.3 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)
