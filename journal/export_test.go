package journal

// Hooks for the external tests: what the writer goroutine runs on its own
// timers, run now, as the writer runs it (under wmu).

// PruneDedupNow runs the dedup prune the writer runs every 10 s.
func (s *Store) PruneDedupNow() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.pruneDedup()
}

// TruncateNow runs the TRUNCATE checkpoint the writer runs when idle.
func (s *Store) TruncateNow() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.writerCheckpoint(&ckReq{mode: ckTruncate, done: make(chan struct{})})
}

// PassiveNow runs the checkpointer's PASSIVE checkpoint.
func (s *Store) PassiveNow() error {
	_, _, _, err := s.checkpoint("PASSIVE")
	return err
}
