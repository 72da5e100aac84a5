"""Pure torch + transformers code for the process reward model. Imports nothing from
Django, so it is tested and benchmarked alone. The web process imports only ``config``
(torch-free: the training settings and their bounds), never the rest."""
