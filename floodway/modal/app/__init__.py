"""Deploy time: what `to_modal` makes (the classes, the router, the job and build functions,
the warmers), their images, and where Modal finds them in a container."""
