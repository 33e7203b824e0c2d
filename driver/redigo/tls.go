package redigo

import (
	"crypto/tls"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm/nodekit"
)

// dialTLS returns the dial option that connects over TLS with cfg (plain
// when cfg is nil) through nodekit.Dialer, which reports TLS problems as
// permanent errors; timeout bounds the dial and handshake (0: ctx alone),
// since redis.DialContextFunc overrides redis.DialConnectTimeout.
func dialTLS(cfg *tls.Config, timeout time.Duration) redis.DialOption {
	return redis.DialContextFunc(nodekit.Dialer(cfg, timeout))
}
