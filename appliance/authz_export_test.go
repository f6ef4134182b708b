package appliance

import (
	"time"

	"github.com/herald-mq/herald/appliance/auth"
)

// SetLoginThrottle replaces the failed-login throttle (tests use short
// delays).
func (b *Broker) SetLoginThrottle(base, max time.Duration) {
	b.authz.mu.Lock()
	defer b.authz.mu.Unlock()
	b.authz.throttle = &auth.Throttle{Base: base, Max: max, Window: time.Minute, MaxSources: 16}
	b.authz.failFloor = base // a refused login's answer: as short as the tests' throttle
}

// SetLoginFailFloor sets how soon after its check began a refused login is
// answered, at the earliest.
func (b *Broker) SetLoginFailFloor(d time.Duration) {
	b.authz.mu.Lock()
	defer b.authz.mu.Unlock()
	b.authz.failFloor = d
}
