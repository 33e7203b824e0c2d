package nodekit

import (
	"crypto/tls"
	"strings"
)

// An Endpoint is one thing a Dialer connects to: a Redis server given by
// its address, the primary that Sentinels know by name, or a Redis Cluster
// given by some of its nodes. A driver's Dial takes one (config.Dialer).
type Endpoint struct {
	Addr      string   // the server's address; "" when Master or Cluster is set
	Master    string   // the name the Sentinels know the primary by; "" for a server given by Addr
	Sentinels []string // the Sentinels' addresses, when Master is set
	// Cluster lists nodes of a Redis Cluster to reach it through (a Dialer
	// returns a node over a Cluster client); nil for the other kinds. A
	// Dialer without a Cluster client returns an error matching
	// dlm.ErrInvalid.
	Cluster []string
	// Username and Password authenticate to the server (the primary).
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels.
	SentinelUsername, SentinelPassword string
	// DB is the database number to SELECT on the server (0 for a Cluster).
	DB int
	// TLS, when not nil, makes the connections to the servers TLS ones
	// (the Dialer sets ServerName to the host dialled when it is empty);
	// SentinelTLS does the same for the connections to the Sentinels.
	// config.Config.Open builds them with its TLSConfig.
	TLS, SentinelTLS *tls.Config
}

// String names the endpoint without its credentials.
func (e Endpoint) String() string {
	if e.Cluster != nil {
		return "cluster://" + strings.Join(e.Cluster, ",")
	}
	if e.Master != "" {
		return "sentinel://" + strings.Join(e.Sentinels, ",") + "/" + e.Master
	}
	return e.Addr
}
