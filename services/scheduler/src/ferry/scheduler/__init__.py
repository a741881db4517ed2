"""Ferry scheduler service: delay levels, timers, retry and DLQ, transaction checkback"""
