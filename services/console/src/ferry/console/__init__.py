"""Ferry console: web dashboard and message trace view"""
