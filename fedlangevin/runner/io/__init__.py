"""Files: the checkpoint format (checksum, atomic write, weights-only load), plain-value encoding with its
allow-list of classes, the checkpoint record of a run, and on-disk sample stores. Imports no part of the round machinery
(except the allow-list, which names the classes a checkpoint may rebuild)."""
