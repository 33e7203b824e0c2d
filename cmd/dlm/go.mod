module github.com/dlmgo/dlm/cmd/dlm

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/dlmgo/dlm v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.48.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/gomodule/redigo v1.9.3 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	github.com/valkey-io/valkey-go v1.0.79 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
