package appliance

import "syscall"

// sysinfoRAM is the machine's RAM as sysinfo(2) gives it, or 0.
func sysinfoRAM() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(uint64(si.Totalram) * uint64(si.Unit))
}
