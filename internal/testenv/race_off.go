//go:build !race

package testenv

// Race is true when the tests run under the race detector (go test -race).
const Race = false
