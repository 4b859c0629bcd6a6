"""The kit every app builds on: validators, revisioned records, roles, the settings reader, the
read-only API and admin bases, and the job-row base. It imports no app of ours."""
