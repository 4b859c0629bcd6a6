"""Settings for the Headroom control plane, all from the environment.

Embedded defaults (no variables set): SQLite file in the repository's ``var/``, Celery tasks
run in-process, DEBUG on. Production: ``DEBUG=false`` plus ``SECRET_KEY``, ``DATABASE_URL``,
``CELERY_BROKER_URL`` and ``ALLOWED_HOSTS``; that mode passes ``manage.py check --deploy``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dj_database_url
import django_stubs_ext

from controlplane.core.conf import (
    envbool,
    envint,
    envlist,
    envnetworks,
    envsecret,
    envstr,
    parse_choice,
)
from planner.capacity.sizing import DEFAULT_TARGET_UTILIZATION

# Lets the admin and form classes take type arguments at run time (``TabularInline[Zone]``),
# as django-stubs declares them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("HEADROOM_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", True)
SECRET_KEY = envsecret(
    "SECRET_KEY",
    required=not DEBUG,
    dev_default="headroom-development-key-not-for-production-use-0123456789abcdef",
)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # The admin on Headroom's site (policy work first on its index).
    "controlplane.web.admin_site.HeadroomAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "simple_history",
    "controlplane.core",
    "controlplane.fleet",
    "controlplane.policies",
    "controlplane.access",
    "controlplane.scenarios",
    "controlplane.api",
    "controlplane.plans",
    "django_celery_beat",
    "controlplane.telemetry",
    "controlplane.benchmarks",
    "controlplane.emission",
    "controlplane.web",
    "controlplane.pipeline",
    "controlplane.finance",
    "axes",
]

MIDDLEWARE = [
    # Probes (/healthz, /readyz) from a pod IP, answered before the Host check refuses them.
    "controlplane.health.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Errors under /api/ that no DRF view shaped (no such route, a refused Host, an unhandled
    # exception) get the API's JSON error body.
    "controlplane.core.errors.ApiErrorMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Records the acting user on every history row written during a request.
    "simple_history.middleware.HistoryRequestMiddleware",
    # Turns a login refused for lockout into 429 (django-axes wants to be last).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "controlplane" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'headroom.sqlite3'}"),
        # Persistent connections: a web thread keeps its connection for this many seconds
        # instead of opening one per request (a new PostgreSQL connection is a new server
        # process, several milliseconds of both machines' CPU). 0 closes it after each request.
        # The connection is checked before a request reuses it, so one the database dropped is
        # replaced rather than failing the request (docs/benchmarks.md, "API load").
        conn_max_age=envint("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default shares one SQLite file between the web workers, the in-process
    # task threads and the isolated task processes. A transaction takes the write lock when
    # it begins, so two that read and then write wait for each other rather than one failing
    # at once with "database is locked" (SQLite cannot make a reader a writer while another
    # writes); and a statement waits up to HEADROOM_SQLITE_BUSY_TIMEOUT_S for a lock.
    #
    # Write-ahead logging (HEADROOM_SQLITE_JOURNAL_MODE, default wal): readers read the last
    # committed state while a writer writes, instead of waiting behind its lock. In SQLite's
    # default rollback journal a burst of writes (20 what-if submits at once) made every read
    # in those two seconds wait out the busy handler's sleeps (docs/benchmarks.md, "What-if
    # previews beside a reader"). WAL needs the file on a local disk, as the embedded default
    # is; "delete" restores the rollback journal.
    SQLITE_JOURNAL_MODE = parse_choice(
        "HEADROOM_SQLITE_JOURNAL_MODE",
        envstr("HEADROOM_SQLITE_JOURNAL_MODE", "wal"),
        ("wal", "delete", "truncate", "persist"),
    )
    # In WAL mode a commit need not wait for the disk (HEADROOM_SQLITE_SYNCHRONOUS, default
    # normal there, full otherwise): the file stays consistent through any crash, and a
    # process that dies loses nothing it committed; only a power cut or kernel crash can lose
    # the last commits before the next checkpoint. Each submit in a burst of writes waited out
    # the commits before it, each a disk flush, holding a web worker meanwhile.
    SQLITE_SYNCHRONOUS = parse_choice(
        "HEADROOM_SQLITE_SYNCHRONOUS",
        envstr("HEADROOM_SQLITE_SYNCHRONOUS", "normal" if SQLITE_JOURNAL_MODE == "wal" else "full"),
        ("normal", "full", "extra"),
    )
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=envint("HEADROOM_SQLITE_BUSY_TIMEOUT_S", 30, minimum=1),
        transaction_mode="IMMEDIATE",
        # The journal mode is the file's own and is set by controlplane.core.sqlite when a
        # connection opens (changing it takes a lock the busy timeout does not wait for).
        init_command=f"PRAGMA synchronous={SQLITE_SYNCHRONOUS};",
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The login limits first (django-axes' lockout, then the slower rates): they refuse a
# locked-out client before any password is checked.
AUTHENTICATION_BACKENDS = [
    "controlplane.core.clients.LoginLimitBackend",
    "django.contrib.auth.backends.ModelBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(envstr("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# WhiteNoise serves the collected files from the web process itself; in production with
# hashed names (cached for a year), which `collectstatic` writes at image build time.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# Sign-in: the operators' login page, and the fleet overview after it (also for the API's
# session login at /api/auth/login/ when no ?next= is given).
LOGIN_URL = "web:login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "web:login"

REST_FRAMEWORK = {
    # DRF's JSON renderer, which renders a body marked as never changing once per process
    # (controlplane.core.renderers), and the browsable API.
    "DEFAULT_RENDERER_CLASSES": [
        "controlplane.core.renderers.RenderedOnceJSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        # Tenant keys: "Authorization: Bearer <key>", one tenant's records only (docs/api.md).
        "controlplane.access.authentication.TenantKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.core.roles.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": [
        "controlplane.core.filters.StrictFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "controlplane.core.schema.HeadroomAutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.errors.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Headroom API",
    "DESCRIPTION": "Policy, fleet, plans and forecasts of the Headroom control plane.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies are documented as JSON only: what clients (and the API fuzz) send. The
    # views still parse forms at runtime for the browsable API's HTML forms, where a field
    # can only be text and null cannot be said; the schema promises JSON's types.
    "PARSER_WHITELIST": ["rest_framework.parsers.JSONParser"],
    # Choice sets that share a field name get explicit names; otherwise drf-spectacular warns
    # and invents hashed ones (the schema check runs with --fail-on-warn).
    "ENUM_NAME_OVERRIDES": {
        "CapacityFigureSourceEnum": "controlplane.fleet.models.CapacityFigure.Source",
        "WorkloadProfileSourceEnum": "controlplane.policies.models.WorkloadProfile.Source",
        "RunStatusEnum": "controlplane.telemetry.models.RunStatus",
        "DriftAlertStatusEnum": "controlplane.telemetry.models.DriftAlert.Status",
        "HistoryEntryKindEnum": "controlplane.api.history.CHANGE_KIND_CHOICES",
        "OutboxEntryStatusEnum": "controlplane.emission.models.OutboxEntry.Status",
        "PlanTriggerEnum": "controlplane.plans.models.Plan.Trigger",
        "BenchmarkRunTriggerEnum": "controlplane.benchmarks.models.BenchmarkRun.Trigger",
        "BenchmarkRunKindEnum": "controlplane.benchmarks.models.BenchmarkRun.Kind",
        "TenantKeyStateEnum": "controlplane.access.models.TenantKey.State",
    },
}

# Celery: without a broker, tasks run in-process (embedded default).
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", "")
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", "")
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL == ""
# Without a broker, tasks declared isolated (those that start Ray) run in a child process, not
# in the web request that sent them (controlplane/core/isolated.py). The test suite runs them
# in-process on its own database; its isolation test turns this back on.
HEADROOM_ISOLATE_TASKS = envbool("HEADROOM_ISOLATE_TASKS", True)
# When a plan becomes active, a task computes and stores its finance snapshot and the monthly
# forecast and showback, so that no web request pays for them (controlplane/finance/tasks.py).
HEADROOM_FINANCE_WARM = envbool("HEADROOM_FINANCE_WARM", True)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Every task stops within a time limit: the soft limit raises inside the task (a re-plan or a
# benchmark run then ends FAILED with the reason), the hard limit ends the worker process.
CELERY_TASK_TIME_LIMIT = envint("HEADROOM_TASK_TIME_LIMIT_S", 7200, minimum=120)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 60
# Late acknowledgement on Redis: a task not acknowledged within the visibility timeout is
# handed to another worker. It must outlast the longest run (the hard limit) plus the longest
# retry countdown (pulls back off up to 15 minutes), or a slow task would run twice.
HEADROOM_MAX_RETRY_COUNTDOWN_S = 900
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": envint(
        "HEADROOM_BROKER_VISIBILITY_TIMEOUT_S",
        2 * (CELERY_TASK_TIME_LIMIT + HEADROOM_MAX_RETRY_COUNTDOWN_S),
        minimum=CELERY_TASK_TIME_LIMIT + HEADROOM_MAX_RETRY_COUNTDOWN_S + 1,
    )
}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}

if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

# Who is asking. X-Forwarded-For is believed only from these proxies (addresses or networks,
# comma-separated): the load balancer or ingress in front of the web pods. Empty: the peer
# address is the client.
HEADROOM_TRUSTED_PROXIES = envnetworks("HEADROOM_TRUSTED_PROXIES", [])

# Login limits on every login path: the admin, the API's session login and the token endpoint
# (controlplane.core.clients says how they work together). The lockout (django-axes): after
# HEADROOM_LOGIN_FAILURE_LIMIT failures for one username from one client address, that pair
# gets 429 for HEADROOM_LOGIN_COOLOFF_MINUTES (each failure during the lockout starts the
# cool-off again); the same user from another address is not locked out. Slower rates: once a
# username has HEADROOM_LOGIN_USERNAME_FAILURES failures within HEADROOM_LOGIN_RATE_WINDOW_MINUTES
# (from any addresses), each address that failed for it within the window is refused until
# its last failure is a window old; an address with HEADROOM_LOGIN_ADDRESS_FAILURES failures
# in the window (any usernames) is refused until it has fewer. `manage.py axes_reset`
# (axes_reset_ip, axes_reset_username) lifts the lockout, `axes_reset_failure_logs --age 0`
# the rates; docs/operations.md says when.
AXES_FAILURE_LIMIT = envint("HEADROOM_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("HEADROOM_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_ENABLE_ACCESS_FAILURE_LOG = True
HEADROOM_LOGIN_USERNAME_FAILURES = envint("HEADROOM_LOGIN_USERNAME_FAILURES", 20, minimum=1)
HEADROOM_LOGIN_ADDRESS_FAILURES = envint("HEADROOM_LOGIN_ADDRESS_FAILURES", 50, minimum=1)
HEADROOM_LOGIN_RATE_WINDOW = timedelta(
    minutes=envint("HEADROOM_LOGIN_RATE_WINDOW_MINUTES", 60, minimum=1)
)
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "controlplane.core.clients.client_address_for_axes"
AXES_LOCKOUT_CALLABLE = "controlplane.core.clients.lockout_response"
AXES_VERBOSE = False

# Capacity figures older than this are stale: plans built on them are flagged.
HEADROOM_CAPACITY_MAX_AGE_DAYS = envint("HEADROOM_CAPACITY_MAX_AGE_DAYS", 30)
# Planning utilisation of a shape that sets none.
HEADROOM_DEFAULT_TARGET_UTILIZATION = float(
    envstr("HEADROOM_DEFAULT_TARGET_UTILIZATION", str(DEFAULT_TARGET_UTILIZATION))
)
# The job pipeline: a telemetry pull that stored samples enqueues a profile derivation, and a
# derivation that raised new drift alerts requests a re-plan (trigger "drift"). Turn either
# off to run the steps on their own schedules only.
HEADROOM_TELEMETRY_DERIVE_AFTER_PULL = envbool("HEADROOM_TELEMETRY_DERIVE_AFTER_PULL", True)
HEADROOM_REPLAN_ON_DRIFT = envbool("HEADROOM_REPLAN_ON_DRIFT", True)
# Once telemetry has been pulled, a re-plan that would size a demand from its declared profile
# fails its run naming the demands (controlplane.plans.conf). Off for the embedded quick start.
HEADROOM_REPLAN_REQUIRE_TELEMETRY = envbool("HEADROOM_REPLAN_REQUIRE_TELEMETRY", False)
