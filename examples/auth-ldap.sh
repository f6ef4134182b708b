#!/bin/sh
# Herald auth.command: check a login against LDAP by binding as the user with
# ldapwhoami (Debian package ldap-utils). In herald.toml:
#
#   [auth]
#   users_file = "/etc/herald/users.toml"   # groups and their permissions
#   command = ["/usr/local/lib/herald/auth-ldap.sh", "ldaps://ldap.example.com", "uid=%s,ou=people,dc=example,dc=com"]
#
# heraldd writes the user name and the password to standard input, one per
# line. Exit 0: the directory accepted the bind; 1: it refused (or the name
# is not a plain user name); 2: anything else (unreachable server, ...).
# To give users groups of the users file, print one group name per line
# before exiting 0 (for example from an ldapsearch of memberOf).
set -u
uri=$1
dn_template=$2
IFS= read -r user || exit 1
IFS= read -r password || exit 1
case $user in
'' | *[!A-Za-z0-9._-]*) exit 1 ;; # nothing that could change the DN
esac
dn=$(printf "$dn_template" "$user")
# The password reaches ldapwhoami through a pipe (-y), never its arguments.
printf '%s' "$password" | ldapwhoami -x -H "$uri" -D "$dn" -y /dev/stdin >/dev/null 2>&1
case $? in
0) exit 0 ;;
49) exit 1 ;; # invalidCredentials
*) exit 2 ;;
esac
