"""A config's text read as YAML with the line of every key (`yamlsrc`), cut where its
top-level sections start so each composes alone (`yamlsplit`), and parsed beside a busy
reactor in a child process that sends the value back in frames (`yamlchild`,
`yamlframes`). The config's model and its checks (the rest of `config`) read the values
this gives; nothing here knows what a key means."""
