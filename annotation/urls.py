"""HTML pages."""
urlpatterns: list = []
