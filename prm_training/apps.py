from django.apps import AppConfig


class PrmTrainingConfig(AppConfig):
    name = "prm_training"
    verbose_name = "PRM training"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The annotation app calls this when a submit finishes a chain; it never imports
        # the training app.
        from annotation.chains.events import chain_finished_register
        from prm_training.services.autostart import training_autostart_enqueue

        chain_finished_register(training_autostart_enqueue)
        # Figures on an evaluation set whose chains a lead changed are dropped with them;
        # then (the hooks run in this order) every version is measured on a set that
        # lacks its figures, a set just marked included.
        from annotation.datasets.evaluation_sets import evaluation_set_changed_register
        from prm_training.services.evaluation import evaluation_results_stale_drop
        from prm_training.services.evaluation_runs import evaluation_sets_changed

        evaluation_set_changed_register(evaluation_results_stale_drop)
        evaluation_set_changed_register(evaluation_sets_changed)
        # A held-out chain's labels changed (a ruling, a revision): its set's figures are
        # measured again on the new labels (they stay shown until then).
        from annotation.chains.events import chain_labels_changed_register
        from prm_training.services.evaluation_runs import evaluation_set_labels_changed

        chain_labels_changed_register(evaluation_set_labels_changed)
        # The data manager's PRM score and uncertainty columns, read through the ORM.
        from annotation.chains.scores import chain_score_source_register
        from prm_training.chain_scores import SOURCE

        chain_score_source_register(SOURCE)
        # The ML page among the project's pages: linked for the roles that may open it.
        from annotation.navigation import ProjectPage, project_page_register
        from prm_training.selectors import ML_AND_LEADS

        project_page_register(
            ProjectPage("project-models", "Models", ML_AND_LEADS), after="snapshots-page"
        )
        # Every process registers the tasks: the services send them by name.
        from prm_training import tasks  # noqa: F401
