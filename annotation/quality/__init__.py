"""Quality: how far the labels can be trusted.

- ``agreement`` and ``agreement_math`` (kappa, alpha and their intervals),
  ``chain_agreement`` (each chain's agreement, kept on its row).
- ``consensus`` (majority and Dawid-Skene, ``dawid_skene``): one answer per step.
- ``review`` and ``review_reads``: disagreements, flags, adjudication.
- ``gold`` and ``gold_reads``: answer keys, the queue's gold mix-in, screening.
- ``machine_quality``: each machine source measured against people;
  ``prelabel_effects``: what showing machine verdicts does to people.
- ``api/`` the HTTP doors, ``urls`` their routes.
"""
