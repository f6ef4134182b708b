#!/bin/sh
# Herald: after the files are unpacked. Owns /var/lib/herald to herald, then
# enables and starts the service on a first install, or restarts it on an
# upgrade, where systemd runs.
#   deb postinst: configure [LAST-CONFIGURED] | abort-upgrade | abort-remove | ...
#   rpm %post:    1 (install) | 2 (upgrade)
set -e

action=none
case "$1" in
configure)
	# A reinstall after "dpkg -r" (config files kept) also passes the old version.
	if [ -z "$2" ]; then action=install; else action=upgrade; fi
	;;
1) action=install ;;
[0-9]*) action=upgrade ;;
esac
[ "$action" = none ] && exit 0

if [ -d /var/lib/herald ]; then
	chown herald:herald /var/lib/herald
	chmod 0750 /var/lib/herald
fi
if [ -f /etc/herald/herald.toml ]; then
	# It may hold multicast keys: readable by heraldd, not by everyone.
	chown root:herald /etc/herald/herald.toml
	chmod 0640 /etc/herald/herald.toml
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	case "$action" in
	install)
		systemctl enable herald.service || true
		systemctl start herald.service || echo "herald: the service did not start; see: journalctl -u herald" >&2
		;;
	upgrade)
		# Restart a running service; start an enabled one that is stopped
		# (reinstall after removal). A disabled service stays as it is.
		if systemctl is-active --quiet herald.service; then
			systemctl restart herald.service || echo "herald: the service did not restart; see: journalctl -u herald" >&2
		elif systemctl is-enabled --quiet herald.service; then
			systemctl start herald.service || echo "herald: the service did not start; see: journalctl -u herald" >&2
		fi
		;;
	esac
else
	# No systemd here (a container, a chroot): nothing was enabled, started
	# or restarted. Say so, and how to run the daemon by hand.
	cat >&2 <<'EOF_MSG'
herald: systemd is not running here, so herald.service was not enabled, started
or restarted. Start the daemon by hand, as the herald user:
  install -d -o herald -g herald -m 0750 /run/herald
  setpriv --reuid herald --regid herald --init-groups heraldd --config /etc/herald/herald.toml
(or run it under your own supervisor); where systemd runs: systemctl enable --now herald
EOF_MSG
fi
exit 0
