package faults

import (
	"net"
	"testing"
	"time"
)

// Hosts reach the runner; a partition makes a new connection hang (not
// fail) until it heals.
func TestNet(t *testing.T) {
	t.Parallel()
	n, err := NewNet()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, err := n.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", n.Runner+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
					_, _ = c.Write(b)
				}
			}()
		}
	}()
	// nc is not on every machine: a shell's /dev/tcp is.
	echo := func() error {
		return a.Command("bash", "-c", "exec 3<>/dev/tcp/"+n.Runner+"/"+port(l)+"; echo x >&3; head -c 1 <&3").Run()
	}
	if err := echo(); err != nil {
		t.Fatalf("host to runner: %v", err)
	}
	if err := n.Partition([]string{a.IP}, []string{n.Runner}); err != nil {
		t.Fatal(err)
	}
	cmd := a.Command("timeout", "1", "bash", "-c", "exec 3<>/dev/tcp/"+n.Runner+"/"+port(l)+"; echo x >&3; head -c 1 <&3")
	start := time.Now()
	if err := cmd.Run(); err == nil {
		t.Fatalf("a blocked host reached the runner")
	}
	if time.Since(start) < 900*time.Millisecond {
		t.Errorf("a blocked connection failed at once instead of hanging")
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := echo(); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
}

func port(l net.Listener) string {
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}
