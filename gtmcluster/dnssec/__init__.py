"""DNSSEC online signing: zone keys (`keys`) and signatures of answer RRsets (`signer`)."""
