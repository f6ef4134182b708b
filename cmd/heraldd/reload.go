package main

import (
	"strings"

	"github.com/herald-mq/herald/appliance"
)

// reload (SIGHUP) re-reads the config file, applies the command line's
// flags over it, and hands it to Broker.Reload, which applies every key
// that can change without dropping a client (appliance/reload.go lists
// them) or, when the file is invalid, nothing at all. The log level is the
// daemon's own. The changed keys that need a restart are logged by name,
// on one line, at every reload until the restart.
func (d *daemon) reload() {
	if d.configPath == "" {
		d.log.Info("SIGHUP: no config file to reload (heraldd was started without --config)")
		return
	}
	refused := func(err error) {
		d.log.Error("SIGHUP: configuration not reloaded; the running one stays in force, unchanged. Fix the file (check it with: heraldd --check-config --config "+d.configPath+") and send SIGHUP again", "err", err)
	}
	cfg, err := appliance.LoadConfig(d.configPath)
	if err != nil {
		refused(err)
		return
	}
	d.overrides(&cfg)
	ch, err := d.broker.Reload(cfg)
	if err != nil {
		refused(err)
		return
	}
	level := d.broker.Config().Log.Level
	applied := "nothing changed"
	if len(ch.Reloaded) > 0 {
		applied = strings.Join(ch.Reloaded, ", ")
	}
	// Logged before the new level applies, so that it shows however the
	// level changes.
	d.log.Info("SIGHUP: configuration reloaded", "applied", applied, "log_level", level)
	keys := append([]string(nil), ch.Restart...)
	d.restartKeys.Store(&keys)
	if len(ch.Restart) > 0 {
		d.log.Warn("SIGHUP: changed keys need a restart (systemctl restart herald); until then they keep their old values", "keys", strings.Join(ch.Restart, ", "))
	}
	// As before: SIGHUP also resets a level set through the admin API.
	d.level.Set(parseLevel(level))
}
