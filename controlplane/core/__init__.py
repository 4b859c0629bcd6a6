"""The kit every app builds on: validators, revisioned records, roles, the settings reader, the
read-only API and admin bases, the job-row base, the client address and the API's error
middleware. It imports no app of ours."""
