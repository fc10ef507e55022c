"""Static proximity: address lists, regions, topology records with longest-match ordering."""
