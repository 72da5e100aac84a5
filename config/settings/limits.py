"""What one request or one person may cost the platform, read from the environment;
``base`` includes them: what an anonymous request may store, the SAML consumer's input
bounds, the guidelines preview's rate and the runs a project and a node may queue."""

import os

# What a request from someone not signed in may leave behind (annotation/sessions.py):
# a session row of at most STEPLAB_ANONYMOUS_SESSION_MAX_BYTES of JSON, kept at most
# STEPLAB_ANONYMOUS_SESSION_SECONDS (a signed-in session keeps Django's two weeks). The
# SAML assertion consumer takes a posted body of at most STEPLAB_SAML_MAX_BODY_BYTES (a
# signed response with hundreds of group values is some tens of kB), reads its XML only
# within STEPLAB_SAML_MAX_ELEMENTS elements and STEPLAB_SAML_MAX_DEPTH levels, and keeps
# it for its finishing step only once the IdP's signature holds (annotation/sso_saml.py).
SESSION_ENGINE = "annotation.sessions"
STEPLAB_ANONYMOUS_SESSION_MAX_BYTES = int(
    os.environ.get("STEPLAB_ANONYMOUS_SESSION_MAX_BYTES", str(32 * 1024))
)
STEPLAB_ANONYMOUS_SESSION_SECONDS = int(os.environ.get("STEPLAB_ANONYMOUS_SESSION_SECONDS", "3600"))
STEPLAB_SAML_MAX_BODY_BYTES = int(os.environ.get("STEPLAB_SAML_MAX_BODY_BYTES", str(256 * 1024)))
STEPLAB_SAML_MAX_ELEMENTS = int(os.environ.get("STEPLAB_SAML_MAX_ELEMENTS", "10000"))
STEPLAB_SAML_MAX_DEPTH = int(os.environ.get("STEPLAB_SAML_MAX_DEPTH", "32"))
# A next URL kept across a sign-in (allauth's states, in the session) is at most this long.
STEPLAB_NEXT_URL_MAX_CHARS = 2000

# Guidelines previews per user (annotation/projects/api/projects.py), counted in the cache.
STEPLAB_GUIDELINES_PREVIEW_RATE = os.environ.get("STEPLAB_GUIDELINES_PREVIEW_RATE", "30/min")

# How many runs of each kind may be queued or running at once, in one project and on the
# node (every project together): a start past either is refused with a 429 that lists
# what waits (prm_training.services.runs.run_admission_check). Evaluation runs are not
# started by people: at most one waits per project already. (value, variable) pairs.
STEPLAB_RUN_LIMITS: dict[str, dict[str, tuple[int, str]]] = {
    kind: {
        scope: (int(os.environ.get(variable, default)), variable)
        for scope, variable, default in (
            ("project", f"STEPLAB_MAX_{kind.upper()}_RUNS_PER_PROJECT", per_project),
            ("node", f"STEPLAB_MAX_{kind.upper()}_RUNS_PER_NODE", per_node),
        )
    }
    for kind, per_project, per_node in (
        ("training", "2", "8"),
        ("scoring", "2", "8"),
        ("simulation", "2", "4"),
        ("machine_label", "3", "12"),
    )
}
