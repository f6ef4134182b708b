#!/bin/sh
# A test auth.command: the user name and password arrive on standard input.
IFS= read -r user || exit 1
IFS= read -r pass || exit 1
case "$user:$pass" in
carol:good) echo ops; echo undefined-group; exit 0 ;;
slow:*) sleep 5; exit 0 ;;
crash:*) echo "boom" >&2; exit 3 ;;
*) exit 1 ;;
esac
