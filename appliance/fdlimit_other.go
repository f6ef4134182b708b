//go:build !unix

package appliance

func openFileLimit() int { return 0 }
