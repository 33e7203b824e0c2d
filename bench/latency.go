package main

import (
	"fmt"
	"time"

	"github.com/dlmgo/dlm/internal/redistest"
)

// withRTT puts every address behind a proxy, in this process, that delays
// each reply by rtt, so that every round trip to a node takes at least rtt,
// as over a network. It returns the proxies' addresses, in order, and what
// stops them.
func withRTT(addrs []string, rtt time.Duration) ([]string, func(), error) {
	if rtt <= 0 {
		return nil, nil, fmt.Errorf("-rtt %v: want a positive duration", rtt)
	}
	var proxies []*redistest.Proxy
	stop := func() {
		for _, p := range proxies {
			p.Close()
		}
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		p, err := redistest.NewProxy("127.0.0.1:0", a)
		if err != nil {
			stop()
			return nil, nil, err
		}
		proxies = append(proxies, p)
		p.SetDelay(rtt)
		out[i] = p.Addr
	}
	return out, stop, nil
}
