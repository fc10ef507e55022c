"""DNS data as values, below the config that names it: domain names (`names`), records and
zones (`zone`), zone files and the files they include (`zonefile`, `zoneinclude`), and a
zone's DNSSEC key files (`keys`). No Twisted, no sockets: the config reads zones and keys
with these, and the engines (`dns`, `dnssec`) answer and sign from what they hold."""
