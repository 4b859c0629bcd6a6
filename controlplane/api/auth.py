"""API tokens: exchange a username and password for a token, or revoke your own.

``POST /api/auth/token/`` with ``username`` and ``password`` returns ``{"token": ...}`` (the
same token on every call until it is revoked); send it as ``Authorization: Token <token>``.
``DELETE /api/auth/token/`` with that header revokes it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.signals import user_logged_in
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from controlplane.core.clients import client_address
from controlplane.core.parsers import StrictJSONParser
from controlplane.core.tenancy import request_principal


class PasswordGuessThrottle(AnonRateThrottle):
    """Slows password guessing: token requests per client address (the real one, behind
    trusted proxies only; a client cannot pick a new address per guess with X-Forwarded-For).
    The lockout (django-axes) stops guessing for good; this caps the request rate as well."""

    scope = "auth-token"
    rate = "20/min"

    def get_ident(self, request: Request) -> str:
        return client_address(request._request)


class AuthTokenView(APIView):
    parser_classes = [StrictJSONParser, FormParser, MultiPartParser]
    serializer_class = AuthTokenSerializer

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [AllowAny()]
        return [IsAuthenticated()]

    def get_throttles(self) -> list[Any]:
        if self.request.method == "POST":
            return [PasswordGuessThrottle()]
        return []

    @extend_schema(
        summary="Get an API token",
        request=AuthTokenSerializer,
        responses={
            200: inline_serializer("AuthTokenResponse", fields={"token": serializers.CharField()}),
            429: OpenApiResponse(
                description="Too many failed logins or requests: see Retry-After."
            ),
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        # The Django request, not DRF's wrapper: the lockout marks the request it is handed,
        # and the lockout middleware reads that mark from the Django request.
        serializer = AuthTokenSerializer(data=request.data, context={"request": request._request})
        serializer.is_valid(raise_exception=True)
        user = serializer.validated_data["user"]
        # Getting a token is logging in: the signal records last_login and lets the lockout
        # forget earlier failures, as a session login does.
        user_logged_in.send(sender=type(user), request=request._request, user=user)
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key})

    @extend_schema(summary="Revoke your API token", request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        if request_principal(request) is not None:
            # Not a user's token: answering 204 would let its holder think it was revoked.
            raise exceptions.PermissionDenied(
                "A tenant key is revoked by a policy admin (DELETE /api/tenant-keys/{id}/)."
            )
        # IsAuthenticated lets only a signed-in user this far: the check narrows the type.
        if isinstance(request.user, User):
            Token.objects.filter(user=request.user).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
