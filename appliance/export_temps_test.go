package appliance

// TempClaims is how many temporary-queue names the broker remembers
// (b.temps), for the tests.
func (b *Broker) TempClaims() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.temps)
}
