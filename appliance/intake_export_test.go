package appliance

// SetIntakeInflight sets how many bytes of batches the journal may hold
// from the connections (intakeInflight) for brokers started afterwards.
func SetIntakeInflight(n int64) (old int64) {
	old, intakeInflight = intakeInflight, n
	return old
}
