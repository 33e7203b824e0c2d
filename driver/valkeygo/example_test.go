package valkeygo_test

import (
	"context"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/dlmgo/dlm"
	valkeynode "github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/strategy"
)

// A lock over a valkey-go client the program already has. (Compiled, not
// run: it needs a server at 127.0.0.1:6379; the driver's tests start their
// own.) The Node's Run, RunWait and Watch are nodekit.PipeNode's, the same
// as driver/rueidis's: its examples show them.
func ExampleNew() {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	single, err := strategy.NewSingle(valkeynode.New(client))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := dlm.New(single, dlm.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	lock, err := m.Lock(ctx, "orders:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	fmt.Println("fence", lock.Fence())
}
