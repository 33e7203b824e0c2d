module github.com/dlmgo/dlm/fencing/pgtest

go 1.26.0

require (
	github.com/dlmgo/dlm v0.1.0
	github.com/lib/pq v1.12.3
)
