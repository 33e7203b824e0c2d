//go:build !linux

package main

import "errors"

// canPin is false outside Linux: the serial scenario runs where the
// scheduler puts it.
func canPin() bool { return false }

func (s *servers) Pin() (func(), error) { return nil, errors.ErrUnsupported }
