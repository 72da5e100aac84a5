"""Pure torch + transformers code for the process reward model. Imports nothing from
Django, so it is tested and benchmarked alone; the web process never imports it."""
