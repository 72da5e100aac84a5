"""Routing: where machine labels send a chain (issue 23).

- ``services``: the routing pass (machine-agreed chains out of people's hands,
  disagreements first, spot checks) and its task's name, ``chains_second_look``.
- ``selectors``: chains per rule and the spot checks' error rate.
- ``machine_labels``: machine labels as leads read them beside people's votes (newest
  run per step and source, first errors, the disagreement filter).
- ``api``: the summary and "Route now"; ``urls`` their routes.
"""
