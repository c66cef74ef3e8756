"""In-memory stand-ins for the interfaces the services drive."""
