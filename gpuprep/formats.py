"""The report formats (report.render renders each) and the file extensions that choose one for -o. A module of its
own, so that the CLI can offer them without importing the renderers."""

FORMATS = ("text", "json", "junit", "prometheus", "html")
BY_EXTENSION = {".json": "json", ".xml": "junit", ".prom": "prometheus", ".html": "html", ".htm": "html",
                ".txt": "text"}
