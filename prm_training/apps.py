from django.apps import AppConfig


class PrmTrainingConfig(AppConfig):
    name = "prm_training"
    verbose_name = "PRM training"
    default_auto_field = "django.db.models.BigAutoField"
