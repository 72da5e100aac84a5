"""HTTP doors of the projects slice: projects, members, invitations, the dashboard."""
