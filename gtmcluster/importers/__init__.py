"""Importers: other GTMs' configuration turned into this project's YAML config.

`f5parse` reads F5's brace syntax (tmsh ``bigip_gtm.conf`` and 3-DNS ``wideip.conf``) into a
tree with line numbers; `f5tmsh` and `f5threedns` map those trees onto an `model.Imported`
(with `f5methods` naming the load-balancing methods and `f5names` making F5 names ours);
`yamlout` writes the result as a commented config. What cannot be mapped is a `Finding`.
"""
