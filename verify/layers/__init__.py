"""The layers of a verify run, in order: the environment, which apex this is (and its manifest), its extensions
and their GPU code, and what the install must provide."""
