package fencing_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/fencing"
)

type lockOf struct {
	key   string
	fence uint64
}

func (l lockOf) Key() string   { return l.key }
func (l lockOf) Fence() uint64 { return l.fence }

// TestMiddleware: requests sent through Transport pass while their fence is
// not below the largest seen for the key (409 otherwise); requests without
// or with malformed headers get 428 and 400; a store that fails gives 503.
// The handler sees the key and fence, a key with any characters included.
func TestMiddleware(t *testing.T) {
	mr := dlmtest.NewServer()
	t.Cleanup(mr.Close)
	var mu sync.Mutex
	var seen []string
	h := fencing.Middleware(fencing.Redis{Node: mr.Node()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, fence, ok := fencing.FromContext(r.Context())
		mu.Lock()
		seen = append(seen, key)
		mu.Unlock()
		if !ok || fence == 0 {
			t.Error("handler without a fence in its context")
		}
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	send := func(l fencing.Fenced) int {
		t.Helper()
		client := &http.Client{Transport: &fencing.Transport{Lock: l}}
		resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	odd := "orders/42 ü\n{}%"
	for _, s := range []struct {
		key   string
		fence uint64
		code  int
	}{
		{"orders:42", 5, 200}, {"orders:42", 3, 409}, {"orders:42", 5, 200}, {"orders:42", 6, 200},
		{"orders:42", 5, 409}, {"orders:43", 1, 200}, {odd, 2, 200}, {odd, 1, 409},
	} {
		if code := send(lockOf{s.key, s.fence}); code != s.code {
			t.Fatalf("%q fence %d: %d, want %d", s.key, s.fence, code, s.code)
		}
	}
	if seen[len(seen)-1] != odd {
		t.Fatalf("handler saw key %q, want %q", seen[len(seen)-1], odd)
	}

	raw := func(hdr map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for name, s := range map[string]struct {
		hdr  map[string]string
		code int
	}{
		"no headers":    {nil, 428},
		"key only":      {map[string]string{fencing.HeaderKey: "k"}, 400},
		"fence only":    {map[string]string{fencing.HeaderFence: "1"}, 400},
		"fence 0":       {map[string]string{fencing.HeaderKey: "k", fencing.HeaderFence: "0"}, 400},
		"negative":      {map[string]string{fencing.HeaderKey: "k", fencing.HeaderFence: "-1"}, 400},
		"not a number":  {map[string]string{fencing.HeaderKey: "k", fencing.HeaderFence: "x"}, 400},
		"bad escape":    {map[string]string{fencing.HeaderKey: "%zz", fencing.HeaderFence: "1"}, 400},
		"key too long":  {map[string]string{fencing.HeaderKey: strings.Repeat("k", fencing.MaxResource+1), fencing.HeaderFence: "1"}, 400},
		"still refused": {map[string]string{fencing.HeaderKey: "orders:42", fencing.HeaderFence: "4"}, 409},
	} {
		if code := raw(s.hdr); code != s.code {
			t.Errorf("%s: %d, want %d", name, code, s.code)
		}
	}

	// A 1 MiB key is refused by the client side before sending.
	req, _ := http.NewRequest("GET", srv.URL, nil)
	if err := fencing.SetHeader(req, strings.Repeat("k", 1<<20), 1); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("SetHeader with a 1 MiB key: %v", err)
	}
	_, err := (&http.Client{Transport: &fencing.Transport{Lock: lockOf{"k", 0}}}).Get(srv.URL)
	if !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("Transport with fence 0: %v", err)
	}

	mr.Close() // the store fails
	if code := send(lockOf{"orders:42", 9}); code != http.StatusServiceUnavailable {
		t.Fatalf("store down: %d, want 503", code)
	}
}
