"""The decorator API: App, @app.endpoint, the Endpoint record and the Loaded model contract.

Import the submodules (`floodway.functions.app`, `.endpoint`, `.loaded`, `.discover`)."""
