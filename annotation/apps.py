from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Every process registers the tasks: the services send them by name.
        # ... and the receiver that sets roles from the identity provider at sign-in.
        from annotation import sso, tasks  # noqa: F401
        from annotation.api import schema  # noqa: F401  (the OpenAPI extensions)
        from annotation.sso_saml_idp import install

        # python3-saml's IdP settings with every certificate, or the metadata's.
        install()
