package main

import "os/exec"

// startBusy starts n busy loops, each a shell spinning on one CPU, and
// returns what kills them. They die with this process too.
func startBusy(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		c.SysProcAttr = busyAttr()
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}
