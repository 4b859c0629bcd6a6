# Run by run_schemathesis.sh inside `manage.py shell`: one user per role, each with an API
# token; prints "TOKEN principal token" lines, and "TENANT name" for the tenant key.
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token

from controlplane.core.roles import ROLES
from controlplane.policies.models import Tenant

for role in ROLES:
    group, _ = Group.objects.get_or_create(name=role)
    user, _ = User.objects.get_or_create(username=f"fuzz-{role}")
    user.set_unusable_password()
    user.save()
    user.groups.set([group])
    token, _ = Token.objects.get_or_create(user=user)
    print("TOKEN", role, token.key)

tenant = Tenant.objects.order_by("name").first()
if tenant is not None:
    print("TENANT", tenant.name)
