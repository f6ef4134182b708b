//go:build !linux

package appliance

func sysinfoRAM() int64 { return 0 }
