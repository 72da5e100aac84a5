"""Read paths: what the API, the pages and the commands show, each module one room
(``access``: who may see which project, for all of them). The writes are in
``annotation.services``."""
