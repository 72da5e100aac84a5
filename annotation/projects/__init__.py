"""Projects: a project, the people in it and how a lead runs it.

- ``services`` (create, settings, members, finishing chains) and ``selectors``
  (projects with their progress and members); the guidelines renderer is
  ``annotation.guidelines`` (the models use it too).
- ``invites``, ``invite_reads``, ``invite_lists`` (lists of people, pure) and
  ``invite_views`` (the pages an invitation's link opens).
- ``dashboard``: the lead dashboard's figures; ``sso_roles``: roles from an identity
  provider's groups.
- ``api/`` the HTTP doors (``serializers`` for the project's settings), ``urls`` their
  routes.
"""
