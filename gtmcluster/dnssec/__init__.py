"""DNSSEC online signing: signatures of answer RRsets (`signer`) with the zone keys
(`dnsdata.keys`), key sets, rollovers and denial."""
