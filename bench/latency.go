package main

import (
	"fmt"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// withRTT puts every address behind a toxiproxy proxy, in this process,
// that delays each reply by rtt (toxiproxy counts whole milliseconds), so
// that every round trip to a node takes at least rtt, as over a network. It
// returns the proxies' addresses, in order, and what stops them.
func withRTT(addrs []string, rtt time.Duration) ([]string, func(), error) {
	ms := rtt.Milliseconds()
	if ms < 1 || rtt%time.Millisecond != 0 {
		return nil, nil, fmt.Errorf("-rtt %v: want whole milliseconds, at least 1ms", rtt)
	}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var proxies []*toxiproxy.Proxy
	stop := func() {
		for _, p := range proxies {
			p.Stop()
		}
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		p := toxiproxy.NewProxy(api, fmt.Sprint("rtt", i), "127.0.0.1:0", a)
		if err := p.Start(); err != nil {
			stop()
			return nil, nil, err
		}
		proxies = append(proxies, p)
		toxic := fmt.Sprintf(`{"name":"rtt","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d}}`, ms)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			stop()
			return nil, nil, err
		}
		out[i] = p.Listen
	}
	return out, stop, nil
}
